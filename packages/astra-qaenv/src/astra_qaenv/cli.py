"""The astra-qaenv command."""

import click


@click.group()
@click.version_option(package_name="astra-qaenv")
def main() -> None:
    """astra-qaenv: see the package README."""
