"""``python -I -m supervisor``: the console script, isolated from the first byte."""

from ._main import main

main()
