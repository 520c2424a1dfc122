"""Lightning glue: the training module, the question data module and the run callbacks."""
