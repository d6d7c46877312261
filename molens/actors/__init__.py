"""pykka actors: thin shells over the pure classes."""
