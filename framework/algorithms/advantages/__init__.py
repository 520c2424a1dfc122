"""Advantage estimators (``advantage=<name>``), one module per method: its config, its pure tensor
functions and its registration in ``ADVANTAGES``. Shared layouts: :mod:`.steps` (GiGPO, HGPO) and
:mod:`.turns` (the turn-level estimators)."""
