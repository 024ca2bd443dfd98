"""Inputs of a pass: the corpus, the model folders, the typed ``Variant`` (what a pass runs) and
the environment record (``manifest``).

May import the facts only.
"""
