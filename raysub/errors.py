"""The one error of a value raysub cannot work with: it names the command-line option at fault, and the
command line prints it as one line and exits with status 2. Each concern has its own kind of it
(SpecError, plan.PlanError)."""


class OptionError(ValueError):
    """A value raysub cannot work with; ``option`` names the command-line option at fault."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


class SpecError(OptionError):
    """A value the job cannot run with; ``option`` names the command-line option at fault."""
