"""``python -m pgrag.cli``: how the model runtime's supervisor is started."""

from . import main

main()
