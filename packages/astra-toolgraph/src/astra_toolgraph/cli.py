"""The astra-toolgraph command."""

import click


@click.group()
@click.version_option(package_name="astra-toolgraph")
def main() -> None:
    """astra-toolgraph: see the package README."""
