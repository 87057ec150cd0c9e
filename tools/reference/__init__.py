"""The reference compiler behind ``tools/build_reference.py``: the readers of the upstream
files (``sources``, ``prose``), the normalisation of names and numbers (``normalise``), what the
build does to the rows (``treatment``) and the README it writes (``readme``)."""
