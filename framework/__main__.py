"""``python -m framework <command>``: same as the ``seekrl`` command."""

from framework.cli.main import main

main()
