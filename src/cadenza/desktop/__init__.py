"""``cadenza desktop``: the node of a home in a native window, with a tray icon, desktop
notifications and a start at login (docs/desktop.md).

The parts that need no display are plain modules, tested on their own:

* :mod:`~cadenza.desktop.instance`: one desktop app per home (an OS file lock) and the
  loopback commands a second start, a notification click or the tray send it;
* :mod:`~cadenza.desktop.node`: start the home's node (a ``cadenza serve`` child) or attach
  to the one serving it, the desktop user and its one-time login ticket, a graceful stop;
* :mod:`~cadenza.desktop.tray`: what the tray says (idle, running N, failed since you last
  looked) and its menu, in the user's language;
* :mod:`~cadenza.desktop.autostart`: the XDG autostart entry, the Windows logon task.

:mod:`~cadenza.desktop.app` puts them together with the window (pywebview) and the tray
(Qt's ``QSystemTrayIcon`` beside Qt WebEngine on Linux, pystray elsewhere); they come with
the ``desktop`` extra (``pip install "cadenza[desktop]"``).
"""
