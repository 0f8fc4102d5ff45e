"""What several built-in step types share: SQL connections and types (``sqlutil``,
``sqltypes``, ``copying``), files and their formats (``files``, ``readers``, ``writers``,
``outfiles``, ``exporting``), charts for reports (``charts``) and LDAP searches
(``ldapsearch``)."""
