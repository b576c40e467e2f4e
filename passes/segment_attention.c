/* segment_attention.c - the segment-attention pass: with the train
 * section's `packing` packed or rows (packed is the default of the
 * masked-LM objective), attention is kept inside each sequence.
 *
 * The batch's rows carry sequences as BOS residues... EOS, back to back
 * (packed) or one per row with padding (rows). One segment_ids node, right
 * after the token ids input, numbers each position's sequence within its
 * row (the BOS tokens seen so far; -1 at padding), and every sdpa takes it
 * as its optional fourth source: query i attends key j only when both have
 * the same segment id (and j <= i when causal); a padding query attends only
 * to itself, so its row stays finite, and no query attends padding. This is
 * the block-diagonal mask of cu_seqlens-style packing, made from the tokens
 * themselves, so the training binary feeds nothing new and the same graph
 * serves packed rows and one sequence per row. autodiff gives sdpa_bwd the
 * same segment ids. */
#include "pass.h"
#include "../util/util.h"

/* The ids of BOS and padding of the alphabets (data/data.h: protein <cls> 0,
 * <pad> 1; dna <bos> 1, <pad> 0). passes/ sits below data/, so they are
 * written here; tests/unit/test_data.c checks that the two agree. */
static int alphabet_ids(IrAlphabet a, int64_t *bos, int64_t *pad)
{
    switch (a) {
    case IR_ALPHABET_PROTEIN:
        *bos = 0, *pad = 1;
        return 1;
    case IR_ALPHABET_DNA:
        *bos = 1, *pad = 0;
        return 1;
    default:
        return 0;
    }
}

int pass_segment_attention(IrGraph *g, PassCtx *ctx)
{
    IrPacking p = ir_train_packing(&g->train);
    if (p != IR_PACK_PACKED && p != IR_PACK_ROWS)
        return 0;
    IrNode *tokens = NULL, *first = NULL;
    int todo = 0;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (!tokens && n->op == IR_OP_EMBEDDING && n->src[0]->op == IR_OP_INPUT && n->src[0]->rank == 2)
            tokens = n->src[0];
        if (n->op == IR_OP_SDPA && n->nsrc == 3) {
            todo++;
            if (!first)
                first = n;
        }
    }
    int64_t bos, pad;
    if (!todo)
        return 0;
    if (!tokens || !alphabet_ids(g->train.alphabet, &bos, &pad)) {
        /* a model that is not trained on sequences (no alphabet, no embedded [B, S] token ids): nothing to
         * segment by; said, not silent */
        ir_add_decision_as(g, "segment-attention", first, 0, "NOT SEGMENTED", NULL,
                           !tokens ? "no [batch, sequence] token ids feed an embedding"
                                   : "the model has no alphabet, so no BOS and padding ids");
        ctx->counters[1] += todo;
        return 0;
    }
    IrNode *seg = ir_node_new(g, IR_OP_SEGMENT_IDS, 1, &tokens, "", "segments", tokens->loc);
    ir_set_attr_i(seg, IR_ATTR_BOS, bos);
    ir_set_attr_i(seg, IR_ATTR_PAD, pad);
    if (!ir_infer_node(seg, ctx->diag))
        return 1;
    ir_graph_move(g, seg, tokens->id + 1);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op != IR_OP_SDPA || n->nsrc != 3)
            continue;
        n->src[3] = seg;
        n->src_loc[3] = n->loc;
        n->nsrc = 4;
        if (!ir_infer_node(n, ctx->diag))
            return 1;
        ctx->counters[0]++;
    }
    return 0;
}
