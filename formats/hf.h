/* hf.h - exchanging models with Hugging Face transformers.
 *
 *   moec import-hf DIR -o MODEL.moe     a MixtralForCausalLM folder (config.json and, when present, its
 *                                       safetensors weights) -> a .moe model file and a moec checkpoint
 *                                       that `TRAIN --init` accepts
 *   moec export-hf MODEL.moe CKPT -o DIR   a moec checkpoint of a Mixtral-shaped model -> config.json and
 *                                       model.safetensors that MixtralForCausalLM.from_pretrained loads
 *
 * Both return the exit status: 0 success, 1 an error in the input (reported
 * as `FILE: error: ...`), 2 a usage error. docs/huggingface.md describes the
 * mapping. */
#ifndef MOEC_HF_H
#define MOEC_HF_H

#include <stddef.h>
#include <stdint.h>

extern const char hf_usage_import[];
extern const char hf_usage_export[];

/* argv[1] is the command name ("import-hf" / "export-hf"). */
int hf_import_main(int argc, char **argv);
int hf_export_main(int argc, char **argv);

/* ---- helpers, exposed for tests/unit/test_hf.c */

float hf_bf16_to_f32(uint16_t h);
float hf_f16_to_f32(uint16_t h);
uint16_t hf_f32_to_bf16(float f);   /* round to nearest even; NaN stays NaN */
/* The shortest %g spelling of a finite double that reads back as the same
 * double, e.g. 1e-05, 1000000 -> "1e+06", 0.02. */
void hf_format_double(char *buf, size_t size, double v);

#endif
