"""One module per `bootstrap` command; each exposes register(app)."""
