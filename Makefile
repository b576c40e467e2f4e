# moec - plain Makefile with explicit object lists.
#
#   make            build build/moec and the pass plugins (build/plugins/*.so)
#   make test       CPU test suite (plain build, then ASan+UBSan build)
#   make fuzz       libFuzzer on the front end (FUZZ_SECONDS, default 600)
#   make clean
#
# CI builds with WERROR=1 (warnings are errors).

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2 -g
WERROR   ?=
SANITIZE ?=
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -Wall -Wextra $(if $(WERROR),-Werror) $(OPT) $(SANITIZE) -MMD -MP
GIT_REV  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
CPPFLAGS_BASE = -I$(BUILD)/gen -Icompiler -DMOEC_GIT='"$(GIT_REV)"'
LDLIBS   = -lcjson -lz -lm -lpthread

GEN      = $(BUILD)/gen
# the commit stamp (moec --version, plans, checkpoints): $(GEN)/git_rev is rewritten only when HEAD moves, and the
# one object that prints it depends on it (below `all`), so an incremental build never keeps an older commit's stamp
$(shell mkdir -p $(GEN) && [ "$$(cat $(GEN)/git_rev 2>/dev/null)" = "$(GIT_REV)" ] || echo "$(GIT_REV)" > $(GEN)/git_rev)
UTIL_SRC = util/util.c util/sha256.c
IR_SRC   = ir/arena.c ir/diag.c ir/ir.c ir/shape.c ir/verify.c \
           ir/print_text.c ir/print_json.c ir/print_dot.c ir/read_text.c
PASS_SRC = passes/pipeline.c passes/infer_shapes.c passes/dce.c passes/segment_attention.c passes/autodiff.c \
           passes/rewrite.c passes/fuse_grouped_mlp.c passes/precision.c \
           passes/expert_parallel.c passes/grad_allreduce.c passes/checkpoint.c
FE_SRC   = compiler/parse.c compiler/lower.c
PLAN_SRC = plan/plan.c plan/memory.c plan/plan_io.c plan/payload.c plan/cost.c plan/gemm_sm90.c
DRIVER_SRC = driver/compile.c driver/build.c
RT_SRC   = runtime/cpu/cpu.c runtime/cpu/moe_metrics.c runtime/cpu/kernels_f32.c runtime/cpu/kernels_f64.c runtime/cpu/mxfp8.c runtime/cpu/fp8_block.c runtime/cpu/backend.c \
           runtime/comm/comm.c runtime/comm/comm_sim.c runtime/comm/comm_tcp.c runtime/comm/comm_wire.c runtime/comm/comm_nccl.c \
           runtime/gpu/cudrv.c runtime/gpu/kimage.c runtime/gpu/nvrtc_units.c runtime/gpu/gpu.c runtime/gpu/backend.c runtime/gpu/tma.c runtime/gpu/plan_args.c
DATA_SRC = data/data.c data/shards.c data/alignment.c
FMT_SRC  = formats/safetensors.c formats/checkpoint.c formats/plot.c formats/plot_moe.c formats/plot_compare.c formats/hf.c formats/hf_import.c \
           formats/hf_export.c
TRAIN_SRC = train/train.c train/flags.c train/loop.c train/checkpoint.c train/metrics.c train/launch.c train/eval.c train/moe_metrics.c train/ckpt_match.c train/ckpt_keep.c train/infer.c train/embed.c train/score.c train/cluster_env.c train/dryrun.c
# the CUDA code generator (docs/codegen.md); the device library it pastes into every kernels.cu
# (util/e4m3.h, shared with the CPU, then codegen/*.cuh) becomes C strings in $(GEN)/cuda_prelude.c
CODEGEN_SRC = codegen/cuda.c codegen/cuda_dense.c codegen/cuda_attention.c codegen/cuda_moe.c \
           codegen/cuda_loss.c codegen/cuda_optim.c codegen/cuda_comm.c codegen/cuda_moe_fast.c runtime/gpu/nvrtc.c
CODEGEN_CUH = util/e4m3.h codegen/mxfp8.cuh codegen/prelude.cuh codegen/gemm_sm90_sched.h codegen/sm90.cuh codegen/dswiglu.cuh \
           codegen/gemm_sm90.cuh \
           codegen/moe_fast_offsets.h codegen/moe_fast.cuh codegen/dense_fast.cuh codegen/attn_fast.cuh \
           codegen/fp8_block_fast.cuh
LIB_SRC  = $(UTIL_SRC) $(IR_SRC) $(PASS_SRC) $(FE_SRC) $(PLAN_SRC) $(CODEGEN_SRC) $(DRIVER_SRC) $(RT_SRC) $(DATA_SRC) \
           $(FMT_SRC) $(TRAIN_SRC)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(GEN)/parser.o $(GEN)/lexer.o $(GEN)/cuda_prelude.o
PLUGINS  = fuse_grouped_gelu_mlp
PLUGIN_SO = $(PLUGINS:%=$(BUILD)/plugins/%.so)

.PHONY: all test test-plain test-asan fuzz clean deps
all: $(BUILD)/moec $(PLUGIN_SO)
$(BUILD)/obj/util/util.o: $(GEN)/git_rev

deps:
	@sh tools/check-deps.sh

$(BUILD)/.deps-ok: tools/check-deps.sh
	@sh tools/check-deps.sh
	@mkdir -p $(BUILD) && touch $@

$(GEN)/parser.c $(GEN)/parser.h &: compiler/parser.y $(BUILD)/.deps-ok
	@mkdir -p $(GEN)
	bison -Wall -Werror -d -o $(GEN)/parser.c compiler/parser.y

$(GEN)/lexer.c $(GEN)/lexer.h &: compiler/lexer.l $(BUILD)/.deps-ok
	@mkdir -p $(GEN)
	flex --header-file=$(GEN)/lexer.h -o $(GEN)/lexer.c compiler/lexer.l

# each .cuh as one C string, line by line: backslashes and quotes escaped; e4m3.h goes ahead of mxfp8.cuh
$(GEN)/cuda_prelude.c: $(CODEGEN_CUH) Makefile
	@mkdir -p $(GEN)
	@{ echo '/* generated from $(CODEGEN_CUH) by the Makefile: do not edit */'; \
	  echo 'const char cuda_prelude_mxfp8[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' util/e4m3.h codegen/mxfp8.cuh; echo ';'; \
	  echo 'const char cuda_prelude_lib[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/prelude.cuh; echo ';'; \
	  echo 'const char cuda_prelude_sm90_sched[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/gemm_sm90_sched.h; echo ';'; \
	  echo 'const char cuda_prelude_sm90[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/sm90.cuh codegen/dswiglu.cuh; echo ';'; \
	  echo 'const char cuda_prelude_gemm_sm90[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/gemm_sm90.cuh; echo ';'; \
	  echo 'const char cuda_prelude_moe_fast[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/moe_fast_offsets.h codegen/moe_fast.cuh; echo ';'; \
	  echo 'const char cuda_prelude_dense_fast[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/dense_fast.cuh; echo ';'; \
	  echo 'const char cuda_prelude_attn_fast[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/attn_fast.cuh; echo ';'; \
	  echo 'const char cuda_prelude_fp8_block_fast[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' codegen/fp8_block_fast.cuh; echo ';'; } > $@.tmp
	@mv $@.tmp $@

# generated code is not held to -Wextra (flex emits unused functions)
$(GEN)/%.o: $(GEN)/%.c $(GEN)/parser.h $(GEN)/lexer.h
	$(CC) -std=c11 -D_GNU_SOURCE $(OPT) $(SANITIZE) -Wno-unused-function $(CPPFLAGS_BASE) -c -o $@ $<

$(BUILD)/obj/%.o: %.c $(GEN)/parser.h $(GEN)/lexer.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CPPFLAGS_BASE) -c -o $@ $<

# the reference kernels are the CPU training path: let the compiler vectorise
$(BUILD)/obj/runtime/cpu/kernels_f32.o $(BUILD)/obj/runtime/cpu/kernels_f64.o: OPT := -O3 -g

$(BUILD)/libmoec.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

# the moec command (cli/): main() and the commands, outside libmoec.a
CLI_SRC  = cli/main.c cli/options.c cli/compile.c cli/inspect.c cli/ckpt_diff.c cli/prep.c cli/plot.c
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/obj/%.o)

# -rdynamic: pass plugins (--load-pass) link against the IR and pass API in moec
$(BUILD)/moec: $(CLI_OBJ) $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -rdynamic -o $@ -Wl,--whole-archive $(BUILD)/libmoec.a -Wl,--no-whole-archive \
	    $(CLI_OBJ) $(LDLIBS) -ldl

# ---- pass plugins (docs/adding-a-pass.md): plugins/NAME.c is $(BUILD)/plugins/NAME.so, loaded with
# --load-pass. It links nothing of libmoec.a: the IR and pass API resolve against the moec loading it.
$(BUILD)/plugins/%.so: plugins/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -fPIC -shared -I. -o $@ $< -lm

# ---- tests
$(BUILD)/filecheck: $(BUILD)/obj/tests/filecheck.o
	$(CC) $(SANITIZE) -o $@ $^

$(BUILD)/test_ir: $(BUILD)/obj/tests/unit/test_ir.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/test_gradcheck: $(BUILD)/obj/tests/unit/test_gradcheck.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/test_data: $(BUILD)/obj/tests/unit/test_data.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/test_safetensors: $(BUILD)/obj/tests/unit/test_safetensors.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/test_plot: $(BUILD)/obj/tests/unit/test_plot.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/test_mxfp8: $(BUILD)/obj/tests/unit/test_mxfp8.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/test_fp8_block: $(BUILD)/obj/tests/unit/test_fp8_block.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

# -rdynamic and the whole library, as for moec: the plugin this test loads resolves the API here
$(BUILD)/test_plugin_gelu_mlp: $(BUILD)/obj/tests/unit/test_plugin_gelu_mlp.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -rdynamic -o $@ -Wl,--whole-archive $(BUILD)/libmoec.a -Wl,--no-whole-archive $< \
	    $(LDLIBS) -ldl

# -ldl: comm_nccl.c loads libnccl/libcudart with dlopen (part of libc only from glibc 2.34)
$(BUILD)/test_comm: $(BUILD)/obj/tests/unit/test_comm.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS) -ldl

# -ldl: runtime/gpu/nvrtc.c loads libnvrtc with dlopen
$(BUILD)/test_codegen: $(BUILD)/obj/tests/unit/test_codegen.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS) -ldl

$(BUILD)/test_hf: $(BUILD)/obj/tests/unit/test_hf.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

$(BUILD)/test_util: $(BUILD)/obj/tests/unit/test_util.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS)

# -ldl: the plans it compiles go through codegen (NVRTC is loaded with dlopen, though not called)
$(BUILD)/test_cost: $(BUILD)/obj/tests/unit/test_cost.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS) -ldl

# -ldl: as test_cost (plans through codegen)
$(BUILD)/test_memory: $(BUILD)/obj/tests/unit/test_memory.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS) -ldl

# the sm_90a grouped GEMM (its configuration plan/gemm_sm90.c, its source codegen/gemm_sm90.c, its tensor maps
# runtime/gpu/tma.c; not in libmoec.a yet) and only what it uses: NVRTC, the driver table, the device-library
# strings (-ldl: both load their library with dlopen)
GEMM_SM90_OBJ = $(BUILD)/obj/plan/gemm_sm90.o $(BUILD)/obj/codegen/gemm_sm90.o $(BUILD)/obj/runtime/gpu/tma.o \
           $(filter %/nvrtc.o,$(LIB_OBJ)) $(BUILD)/obj/runtime/gpu/cudrv.o $(GEN)/cuda_prelude.o
$(BUILD)/obj/tests/unit/test_gemm_sm90.o: CPPFLAGS_BASE += -Iruntime/gpu -Icodegen
$(BUILD)/test_gemm_sm90: $(BUILD)/obj/tests/unit/test_gemm_sm90.o $(GEMM_SM90_OBJ)
	$(CC) $(SANITIZE) -o $@ $^ -lpthread -ldl

# the fuzz targets' harnesses on their seeds and past crashes, without libFuzzer
$(BUILD)/test_fuzz_inputs: $(BUILD)/obj/tests/unit/test_fuzz_inputs.o $(BUILD)/libmoec.a
	$(CC) $(SANITIZE) -o $@ $^ $(LDLIBS) -ldl

UNIT_TESTS = test_fuzz_inputs test_util test_ir test_gradcheck test_data test_safetensors test_plot test_mxfp8 test_fp8_block test_plugin_gelu_mlp test_comm \
             test_codegen test_hf test_gemm_sm90 test_cost test_memory
TEST_BINS = $(BUILD)/moec $(BUILD)/filecheck $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(PLUGIN_SO)

test-plain: $(TEST_BINS)
	@bash tests/run.sh $(BUILD)

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g" \
	    SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    build-asan/moec build-asan/filecheck $(addprefix build-asan/,$(UNIT_TESTS)) \
	    $(PLUGINS:%=build-asan/plugins/%.so)
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 bash tests/run.sh build-asan

test: test-plain test-asan

# ---- fuzzing (clang's libFuzzer): one target per parser of untrusted input (tests/fuzz/fuzz_*.c), over one
# build of the library with the fuzzer's coverage and ASan + UBSan; each runs FUZZ_SECONDS (default 600) on its
# seed corpus (tests/fuzz/corpus/NAME: committed, plus for frontend the repository's models and for plan the
# plans of two models compiled by this build); what it finds goes to $(BUILD)/fuzz-corpus/NAME
FUZZ_SECONDS ?= 600
FUZZ_CC ?= clang
FUZZ_TARGETS ?= frontend safetensors hf_config fasta plan comm
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -fno-sanitize-recover=all -Wno-unused-function $(CPPFLAGS_BASE)
FUZZ_LIB_SRC = $(LIB_SRC) $(GEN)/parser.c $(GEN)/lexer.c $(GEN)/cuda_prelude.c
FUZZ_OBJ = $(FUZZ_LIB_SRC:%.c=$(BUILD)/fuzzobj/%.o)
.SECONDARY: $(FUZZ_OBJ)
$(BUILD)/fuzzobj/%.o: %.c $(GEN)/parser.h $(GEN)/lexer.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link,address,undefined -c -o $@ $<
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_file.h $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_OBJ) $(LDLIBS) -ldl

fuzz: SHELL := /bin/bash
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz_%) $(BUILD)/moec
	@for t in $(FUZZ_TARGETS) frontend plan; do mkdir -p $(BUILD)/fuzz-corpus/$$t; \
	    cp tests/fuzz/corpus/$$t/* $(BUILD)/fuzz-corpus/$$t/ 2>/dev/null; done; \
	cp models/*.moe models/variants/*.moe tests/ir/*.moe tests/errors/*.moe tests/train/*.moe \
	    tests/fuzz/regressions/*.input $(BUILD)/fuzz-corpus/frontend/ 2>/dev/null; \
	$(BUILD)/moec compile tests/train/micro_protein.moe --emit-cuda $(BUILD)/fuzz-plan-a > /dev/null && \
	$(BUILD)/moec compile tests/train/micro_dna.moe --emit-cuda $(BUILD)/fuzz-plan-b > /dev/null && \
	cp $(BUILD)/fuzz-plan-a/plan.json $(BUILD)/fuzz-corpus/plan/micro_protein.json && \
	cp $(BUILD)/fuzz-plan-b/plan.json $(BUILD)/fuzz-corpus/plan/micro_dna.json || exit 1; \
	for t in $(FUZZ_TARGETS); do echo "== fuzz_$$t: $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=4096 -close_fd_mask=3 \
	        $$(if [ $$t = frontend ]; then echo -max_len=65536; fi) -print_final_stats=1 \
	        $(BUILD)/fuzz-corpus/$$t 2>&1 | grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==|SUMMARY|Done|INFO: -max_total)' ; \
	    st=$${PIPESTATUS[0]}; [ $$st -eq 0 ] || { echo "fuzz_$$t failed (exit $$st): $(BUILD)/fuzz_$$t reproduces with the crash-* file"; exit 1; }; done

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj $(BUILD)/plugins -name '*.d' 2>/dev/null)
