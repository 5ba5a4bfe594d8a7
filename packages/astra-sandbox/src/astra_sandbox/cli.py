"""The astra-sandbox command."""

import click


@click.group()
@click.version_option(package_name="astra-sandbox")
def main() -> None:
    """astra-sandbox: see the package README."""
