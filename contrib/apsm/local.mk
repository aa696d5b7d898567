# contrib/apsm: asynchronous progress through PMPI
