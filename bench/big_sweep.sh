# Sourced by the benchmarks that read a big sweep (dashboard_bench.sh, python_bench.sh): starts a
# cartd on loopback ports in "$dir/cart" (its pid in $pid, its ports in $port and $http) and
# submits one 10,000-run sweep "big" (queued, no metrics) to it; CART_SERVER then names it.
# Needs $build and $dir.
port=$((20000 + RANDOM % 20000)); http=$((port + 1))
"$build/bin/cartd" --listen 127.0.0.1:$port --http 127.0.0.1:$http --data-dir "$dir/cart" \
  >"$dir/cartd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
seeds=$(seq -s, 1 10000)
printf 'name: big\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 1000}\nseeds: [%s]\nmax_runs: 10000\n' \
  "$seeds" >"$dir/big.yaml"
export CART_SERVER=127.0.0.1:$port
"$build/bin/cart" sweep submit "$dir/big.yaml" >/dev/null
