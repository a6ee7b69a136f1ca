"""`python -m provision` is `bootstrap`."""
from provision.cli.app import main

main()
