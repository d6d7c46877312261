"""mooncat_checkpoint: claim / done / fail step records with leases and fencing tokens."""
