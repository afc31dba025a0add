# The reproduction DAG. Usage:
#   snakemake -c2 reproduce_table2                          # tiny profile (default), CPU
#   snakemake -c2 reproduce_all --config profile=smoke      # seconds-scale models, CI
#   snakemake -c1 reproduce_table2 --config profile=paper   # GPU runner, real checkpoints
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
