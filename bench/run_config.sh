# Sourced by the training benchmarks: the performance issue's run (CART d 256, P 2, R 4, T 256,
# batch 8, vocab 4096, metrics every step, no evaluation or checkpoints) as run-config YAML.
# bench_run_yaml STEPS THREADS TRAIN_DATA
bench_run_yaml() {
  cat <<YAML
model: cart
vocab: 4096
d: 256
P: 2
R: 4
seq_len: 256
batch: 8
accum: 1
steps: $1
log_every: 1
eval_every: 0
checkpoint_every: 0
threads: $2
train_data: $3
YAML
}
