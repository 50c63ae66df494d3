"""The programs that run on the job's nodes, with the Python that has Ray (raysub/job/__init__.py says what
they may import). None imports another: what two share is in raysub/job/lib/. Nothing outside this package
imports one (tests/unit/test_house.py): the submit host ships them, and ``raysub smoke`` runs one.
"""
