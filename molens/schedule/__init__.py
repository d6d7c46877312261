"""Pure scheduling logic: the hierarchical time wheel and cron/fixed-rate next-fire computation."""
