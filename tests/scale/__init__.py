"""Many problems and devices: vmap, batched runs, sharding, many processes, the accelerator tier."""
