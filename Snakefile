# The reproduction DAG. Usage:
#   snakemake -c2 reproduce_table2                          # tiny profile (default), CPU
#   snakemake -c2 --config profile=smoke reproduce_all      # seconds-scale models, CI
#   snakemake -c1 --config profile=paper reproduce_table2   # GPU runner, real checkpoints
# Outputs: results/<profile>/ (records) and reports/<profile>/ (tables, figures, index.md).
from snakemake.utils import min_version

min_version("8.0")

PROFILE = config.get("profile", "tiny")


configfile: f"{workflow.basedir}/workflows/config/{PROFILE}.yaml"


include: "workflows/rules/common.smk"
include: "workflows/rules/train.smk"
include: "workflows/rules/evaluate.smk"
include: "workflows/rules/latency.smk"
include: "workflows/rules/report.smk"


rule reproduce_all:
    input:
        rules.reproduce_table1.input,
        rules.reproduce_table2.input,
        rules.reproduce_table3.input,
        rules.reproduce_table4.input,
        rules.reproduce_table5.input,
        rules.reproduce_figures.input,
        f"{REPORTS}/index.md",
