"""The astra-grpo command."""

import click


@click.group()
@click.version_option(package_name="astra-grpo")
def main() -> None:
    """astra-grpo: see the package README."""
