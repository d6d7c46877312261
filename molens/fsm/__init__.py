"""The replicated task state machine: commands, pure transition rules, lmdb store, history."""
