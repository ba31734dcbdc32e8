/* plan_build.c: clremat_plan_build, the planner's entry for a parsed
 * --remat policy: fixed modes to policies.c, budget:BYTES to the budget
 * planner (budget.c). Sitting above both keeps the call graph acyclic: the
 * budget planner calls policies.c for the fixed plans it compares against. */
#include "error.h"
#include "plan.h"

int clremat_plan_build(const clremat_plan_input *in, const clremat_policy *p, clremat_plan *out)
{
    int st;
    if (p->kind == CLREMAT_POLICY_BUDGET) {
        st = clremat_plan_budget(in, p->budget, out);
        if (st == CLREMAT_OK)
            out->policy = *p;
        return st;
    }
    if (p->kind == CLREMAT_POLICY_AUTO)
        return clremat_set_error(CLREMAT_ERR_PLAN,
                                 "remat mode '%s' needs the device's memory limit: plan it with clremat_plan_auto",
                                 p->text);
    return clremat_plan_fixed(in, p, out);
}
