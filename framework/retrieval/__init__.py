"""Local retrieval: passage store, encoders, FAISS / BM25 / hybrid backends, HTTP server and client.

Backends live in :data:`framework.registry.RETRIEVERS` (``retriever=faiss|bm25|hybrid|http``) and
share one interface, :class:`framework.registry.protocols.Retriever`.
"""
