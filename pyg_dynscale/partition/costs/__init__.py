r"""What the partitioners weigh: node costs, workload models, the epoch's rounds, plan bytes."""
