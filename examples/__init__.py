"""One script per lesson section: ``sNN_*.py`` runs §NN's kernels, checks them against the float64
oracle and times them (``python examples/sNN_*.py`` or ``flashlesson section NN``).

The folder installs as ``flashlesson.examples`` so that ``flashlesson tour`` and ``flashlesson
section`` find the scripts in an installed package too; nothing imports it as a package.
"""
