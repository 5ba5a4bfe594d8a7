"""The astra-reward command."""

import click


@click.group()
@click.version_option(package_name="astra-reward")
def main() -> None:
    """astra-reward: see the package README."""
