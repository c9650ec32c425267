// What the recurrent mixers' shaders share (vk_recurrent.c): where a RECURRENT group's per-step data
// sit in the step buffer, and a state slot's floats reached through the group's pool address.
// A RECURRENT group g's four header entries (ST_GROUP + 4 g + ...): its sequences' state slots
// [n_seqs], the checkpoint slot of each token [n_tokens] (-1: none), and each sequence's run of tokens
// [n_seqs][2] (its first token and one past its last).
#define ST_STATE_SLOTS 0
#define ST_CHECKPOINTS 1
#define ST_SEQ_RUNS 3

int st_group(I32 step, uint g, uint which) { return step.v[ST_GROUP + 4 * int(g) + int(which)]; }
uint seq_first(I32 step, uint g, uint s) { return uint(step.v[st_group(step, g, ST_SEQ_RUNS) + 2 * int(s)]); }
uint seq_end(I32 step, uint g, uint s) { return uint(step.v[st_group(step, g, ST_SEQ_RUNS) + 2 * int(s) + 1]); }
int state_slot(I32 step, uint g, uint s) { return step.v[st_group(step, g, ST_STATE_SLOTS) + int(s)]; }
int checkpoint_of(I32 step, uint g, uint t) { return step.v[st_group(step, g, ST_CHECKPOINTS) + int(t)]; }
bool starts_at_zero(I32 step, uint t0) { return step.v[step.v[ST_POSITIONS] + int(t0)] == 0; }
// The floats of slot `slot` from float `offset` (a layer's part of the slot)
F32 slot_floats(uint64_t pool, uint slot_size, int slot, uint offset) {
    return F32(pool + 4ul * (uint64_t(slot) * uint64_t(slot_size) + uint64_t(offset)));
}
