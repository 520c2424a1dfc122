"""Question-answering datasets: the row schema, file loaders and the question synthesis pipeline."""
