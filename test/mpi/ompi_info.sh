#!/bin/sh
# ompi_info.sh: Open MPI lists the component and every MCA parameter of mpiv with its help
# text (`ompi_info --param pml mpiv --level 9`) and its MPI_T performance variables
# (`ompi_info --all`), from the build tree.
set -u
top=${MPIV_TEST_TOP_BUILDDIR:-$(pwd)}
pkglibdir=${MPIV_TEST_OMPI_PKGLIBDIR:-$(ompi_info --parsable --path pkglibdir | sed -n 's/^path:pkglibdir://p')}
out=$(LD_LIBRARY_PATH=$top/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      OMPI_MCA_mca_base_component_path=$top/ompi-component/.libs:$pkglibdir \
      ompi_info --param pml mpiv --level 9 --parsable 2>&1)
echo "$out" | grep -q "^mca:pml:mpiv:version:" || {
    echo "$out"; echo "FAIL ompi_info: component pml mpiv is not listed" >&2; exit 1; }
status=0
for p in priority verbose workers progress lock eager_limit packet_count queue_slots idle_time \
         yield_when_idle single_copy stats server_cpus fallback transports ucx_copy_max decline; do
    if ! echo "$out" | grep -q "^mca:pml:mpiv:param:pml_mpiv_$p:help:."; then
        echo "FAIL ompi_info: parameter pml_mpiv_$p is missing or has no help text" >&2
        status=1
    fi
done
# The MPI_T performance variables (mpiv's counters and two levels), each with help text.
out=$(LD_LIBRARY_PATH=$top/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      OMPI_MCA_mca_base_component_path=$top/ompi-component/.libs:$pkglibdir \
      ompi_info --all --parsable 2>&1)
pvars=$(echo "$out" | grep -c "^mca:pml:mpiv:pvar:pml_mpiv_[a-z_]*:help:..")
if [ "$pvars" -ne 57 ]; then
    echo "$out" | grep "^mca:pml:mpiv:pvar:" >&2
    echo "FAIL ompi_info --all: $pvars pml_mpiv performance variables with help text, not 57" >&2
    status=1
fi
[ $status -eq 0 ] && echo "PASS ompi_info: pml mpiv, its 17 parameters and $pvars performance variables with help text"
exit $status
