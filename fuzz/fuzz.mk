# fuzz.mk: builds the libFuzzer targets with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer. GNU make; `make fuzz` in the build tree calls it
# with the paths, the library's source list and the package flags:
#   fuzz/fuzz_model        model files (loader, shape inference, planner)
#   fuzz/fuzz_safetensors  safetensors files (reader and validation)
#   fuzz/fuzz_cli          clremat command lines (option parsers)
#   fuzz/fuzz_keras        Keras model configurations (importer, loader, planner)
#   fuzz/fuzz_hf           Hugging Face config.json files (Llama import, loader, planner)
# Every library source is compiled again here (objects in fuzz/obj/) so that
# the whole library is instrumented; the OpenCL code is linked, never run.

FUZZ_CC ?= clang
FUZZ_SAN ?= address,undefined
FUZZ_CFLAGS ?= -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=undefined
CPPFLAGS_ALL = -I$(SRCDIR)/include -I$(SRCDIR)/base -I$(SRCDIR)/planner -I$(SRCDIR)/backend -I$(SRCDIR)/host \
	-I$(SRCDIR)/tools -I$(SRCDIR)/fuzz -I$(BUILDDIR) -DCL_TARGET_OPENCL_VERSION=120 -DCLREMAT_LIBFUZZER
CFLAGS_ALL = -std=gnu11 -Wall -Wextra $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,$(FUZZ_SAN) $(PKG_CFLAGS)
LDFLAGS_ALL = -fsanitize=fuzzer,$(FUZZ_SAN) $(PKG_LIBS) -lm

OBJDIR = fuzz/obj
LIB_C = $(filter %.c,$(LIB_SOURCES)) backend/kernels_cl.c
LIB_O = $(patsubst %.c,$(OBJDIR)/%.o,$(LIB_C))
TARGETS = fuzz/fuzz_model fuzz/fuzz_safetensors fuzz/fuzz_cli fuzz/fuzz_keras fuzz/fuzz_hf
UTIL_O = $(OBJDIR)/fuzz/fuzz_util.o  # what fuzz_model, fuzz_keras and fuzz_hf share

vpath %.c $(BUILDDIR) $(SRCDIR)

all: $(TARGETS)

$(OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -c $< -o $@

fuzz/fuzz_model: $(OBJDIR)/fuzz/fuzz_model.o $(UTIL_O) $(LIB_O)
	$(FUZZ_CC) $^ $(LDFLAGS_ALL) -o $@
fuzz/fuzz_safetensors: $(OBJDIR)/fuzz/fuzz_safetensors.o $(LIB_O)
	$(FUZZ_CC) $^ $(LDFLAGS_ALL) -o $@
fuzz/fuzz_cli: $(OBJDIR)/fuzz/fuzz_cli.o $(OBJDIR)/tools/cli_options.o $(LIB_O)
	$(FUZZ_CC) $^ $(LDFLAGS_ALL) -o $@
fuzz/fuzz_keras: $(OBJDIR)/fuzz/fuzz_keras.o $(UTIL_O) $(LIB_O)
	$(FUZZ_CC) $^ $(LDFLAGS_ALL) -o $@
fuzz/fuzz_hf: $(OBJDIR)/fuzz/fuzz_hf.o $(UTIL_O) $(LIB_O)
	$(FUZZ_CC) $^ $(LDFLAGS_ALL) -o $@

.PHONY: all
