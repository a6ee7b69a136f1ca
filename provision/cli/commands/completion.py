"""`bootstrap completion bash|zsh|fish`: the shell completion script, as kubectl prints its own."""
from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from typer._completion_shared import get_completion_script  # Typer is pinned to 0.29.x

from provision.cli.option_table import checked

# The variable the completion script sets when it asks `bootstrap` for candidates.
COMPLETE_VAR = "_BOOTSTRAP_COMPLETE"


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def register(app: typer.Typer) -> None:
    @app.command("completion")
    @checked("completion")
    def completion(shell: Annotated[Shell, typer.Argument(help="bash, zsh or fish.")]) -> None:
        """Print the shell completion script.

        \b
        bash:  source <(bootstrap completion bash)       # or save it as /etc/bash_completion.d/bootstrap
        zsh:   bootstrap completion zsh > "${fpath[1]}/_bootstrap"
        fish:  bootstrap completion fish > ~/.config/fish/completions/bootstrap.fish
        """
        typer.echo(get_completion_script(prog_name="bootstrap", complete_var=COMPLETE_VAR, shell=shell.value))
