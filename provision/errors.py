"""The one exception type for failures a user can act on."""


class BootstrapError(Exception):
    """A failure whose message is shown to the user as is: one line naming what is wrong and the fix."""

    exit_code = 1


class InputError(BootstrapError):
    """Bad input (inventory, settings, arguments), found before any node is touched."""

    exit_code = 2
