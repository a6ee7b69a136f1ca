"""The `bootstrap` command line: argument parsing, views, and one module per command."""
