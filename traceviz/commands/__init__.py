"""One module per CLI command: ``run(...)`` reads the inputs, calls the analyses and
returns a :class:`~.result.Result` (tables, figures, texts and lines, in memory);
``write`` puts it on disk. ``traceviz.cli`` only parses options, calls these and prints.
"""
