"""The built-in step types, one module each, registered like a plugin's (the entry points
of the group ``cadenza.steps`` in ``pyproject.toml``):

==============  ==========================================================
``call_job``    start another job as a child run, by default waiting for it
``file_export`` write a query's rows to a file
``file_load``   load files (a glob) into a table of a SQL connection
``http``        one HTTP request, to a URL or to a path of a connection
``ldap_sync``   mirror LDAP entries into a SQL table
``notify``      send a message through a notification channel
``python``      call ``module:function`` from ``plugins/``
``report``      query results (tables, charts) as HTML, PDF or XLSX
``sql_copy``    copy a query's rows or a table into a table, in batches
``sql_query``   run one query on a SQL connection
==============  ==========================================================

A new step type is one more module like these (a class with a ``Config``, see
:mod:`cadenza.steps.base`) and one entry point. The helpers several types share (SQL, files,
readers and writers, charts) are in :mod:`cadenza.steps.builtin.lib`.
"""
