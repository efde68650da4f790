"""The GRPO stage through TRL's GRPOTrainer (issue 40): config, launch, the script run in the tool env."""
