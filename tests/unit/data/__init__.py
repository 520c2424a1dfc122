"""Tests of the QA dataset schema, loaders and synthesis."""
