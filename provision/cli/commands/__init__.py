"""One module per `bootstrap` command, each exposing register(app)."""
