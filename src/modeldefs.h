/* modeldefs.h — the model's fixed constants, in one place below every
 * layer that uses them (doc/architecture.md): the tokenizer assigns the
 * special ids (bpe.c), the model, data batches and the search read them
 * (model.c, data.c, decode.c, search.c), the kernels compute with LayerNorm's eps
 * (ops.c), and every checkpoint records both ("pad_id" ... "eos_id",
 * "layer_norm_eps": checkpoint.c). Changing one changes the model: old
 * checkpoints would no longer mean what they say.
 */
#ifndef TFM_MODELDEFS_H
#define TFM_MODELDEFS_H

/* Special token ids, the first four of every vocabulary (bpe.h: then the
 * 256 byte tokens, the characters, the merges; bpe.c spells them <pad>,
 * <unk>, <s>, </s>). What a sentence is made of (checkpoint metadata
 * "source_format" = "x_1 .. x_n EOS", "decoder_input" = "BOS y_1 .. y_m",
 * "decoder_target" = "y_1 .. y_m EOS"). */
enum { TOK_PAD = 0, TOK_UNK = 1, TOK_BOS = 2, TOK_EOS = 3 };
/* The smallest vocabulary: the 4 specials, 256 byte tokens (ids 4-259) and
 * the word marker ▁ (id 260, the first character piece). */
enum { BPE_MIN_VOCAB = 261 };

/* LayerNorm's epsilon: y = gamma (x - mean) / sqrt(var + eps) + beta
 * (Ba et al. 2016; torch.nn.LayerNorm's and fairseq's default). */
#define LAYERNORM_EPS 1e-5f

#endif
