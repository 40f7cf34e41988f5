# Sourced by bench/admission_mutate.sh and bench/real_admission.sh: fills
# "$1" (a directory) with the Pod Security set (bench/policies/pss-classic)
# plus the mutate policies of Kyverno's policy library
# (../shared/kyverno-policies, classes classic-mutate and MutatingPolicy of
# its CLASSES.tsv): each folder's own policy file. Left out, and named on
# stderr: policies that read the cluster or a registry (context entries
# with apiCall, configMap, imageRegistry, globalReference), which would
# only measure their lookups failing.
mutate_set() {
  local dir=$1 corpus=${CORPUS:-../shared/kyverno-policies} n=0 skipped=()
  mkdir -p "$dir"
  cp bench/policies/pss-classic/*.yaml "$dir/"
  while IFS=$'\t' read -r folder class; do
    case "$class" in classic-mutate|MutatingPolicy) ;; *) continue ;; esac
    for f in "$corpus/$folder"/*.yaml; do
      [ -f "$f" ] || continue
      if grep -qE '^\s*(apiCall|configMap|imageRegistry|globalReference):' "$f"; then
        skipped+=("$folder"); continue
      fi
      cp "$f" "$dir/mutate-$(echo "$folder" | tr / -)-$(basename "$f")"
      n=$((n + 1))
    done
  done < "$corpus/CLASSES.tsv"
  echo "mutate set: pss-classic ($(ls bench/policies/pss-classic/*.yaml | wc -l) policies) + $n mutate policies; left out (cluster or registry lookups): ${skipped[*]:-none}" >&2
}
