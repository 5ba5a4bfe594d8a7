"""The astra-eval command."""

import click


@click.group()
@click.version_option(package_name="astra-eval")
def main() -> None:
    """astra-eval: see the package README."""
