# The reproduction DAG. Usage:
#   snakemake -c2                                              # Table 2 of the tiny profile (default), CPU
#   snakemake -c2 reproduce_all --config profile=smoke         # seconds-scale models, CI
#   snakemake -c1 reproduce_table2 --config profile=paper      # GPU runner, real checkpoints
#   snakemake -c1 reproduce_table2 --configfile my-paper.yaml  # your own values over a profile's
# A --configfile names its profile (`profile: paper`); its values override that profile's file.
# Outputs: results/<profile>/ (records), reports/<profile>/ (tables, figures, index.md) and
# results/gate/<profile>.jsonl (target `gate`: what the regression gate compares).
# The rows every table shows, and so what runs, are declared once in orl/rows.py.
from snakemake.utils import min_version

min_version("8.0")

from orl.workflow_config import profile_of

# A --configfile must name its profile (orl/workflow_config.py): without one it would override tiny's values.
PROFILE = profile_of(config, workflow.overwrite_configfiles)


configfile: f"{workflow.basedir}/workflows/config/{PROFILE}.yaml"


# `make report`'s first page (snakemake --report ... --report-metadata workflows/report/metadata.yaml):
# the tables as a reader looks at them, then the categories Tables (every column) and Figures.
report: "workflows/report/workflow.rst"


include: "workflows/rules/common.smk"
include: "workflows/rules/train.smk"
include: "workflows/rules/evaluate.smk"
include: "workflows/rules/latency.smk"
include: "workflows/rules/vllm.smk"
include: "workflows/rules/sitting.smk"
include: "workflows/rules/report.smk"


# The targets. Snakemake keeps a default target only from the main Snakefile, so they live here.
for _n in range(1, 6):

    rule:
        name:
            f"reproduce_table{_n}"
        default_target: _n == 2
        input:
            # Table 3b (the engine against the hardware floor) goes with Table 3.
            [
                multiext(f"{REPORTS}/table{n}", ".md", ".tex", ".csv", ".html")
                for n in ([3, "3b"] if _n == 3 else [_n])
            ],


rule base_checkpoints:
    # The base the ORL stage starts from (AR target, draft model, converted dLLM), copied from the committed
    # base or trained: `make reproduce FORCE=1` makes it before it forces the ORL-stage trainings. Copies of
    # the committed base are then given its age (settle_copies), so that the records measured from it stay
    # up to date; a changed base (a newer manifest) still reruns them.
    input:
        [] if PAPER else [ckpt_done(name) for name in BASE_CHECKPOINTS],
    run:
        if BASE_FILES:
            settled = settle_copies(Path(BASE), Path(CKPT))
            print(f"{CKPT}: copies of {BASE} as old as it: {', '.join(settled) or 'none'}")


rule reproduce_figures:
    input:
        expand(f"{REPORTS}/figures/{{fig}}.{{ext}}", fig=FIGURES, ext=["png", "pdf"]),


rule reproduce_all:
    input:
        rules.reproduce_table1.input,
        rules.reproduce_table2.input,
        rules.reproduce_table3.input,
        rules.reproduce_table4.input,
        rules.reproduce_table5.input,
        rules.reproduce_figures.input,
        f"{REPORTS}/index.md",


if NOT_RUN:

    rule not_run:
        # What this profile cannot measure (common.smk: a checkpoint it neither trains nor is given,
        # a benchmark that needs a training preset) still gets its record, saying "not run: <reason>",
        # so every table line says why and every target builds. One job writes them all: a job per
        # record paid a Snakemake job start (about 10 s on two cores) for a line of JSON.
        output:
            sorted(NOT_RUN),
        run:
            for path in output:
                write_not_run(path)
