"""Side-by-side benchmark of ATF and its peers (`make bench`, `python -m bench.run --help`)."""
