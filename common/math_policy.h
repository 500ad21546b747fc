#pragma once

// The Boost.Math error policy of the project's statistics (common/student_t.h, report/stats.h):
// a bad argument, an overflow or a failed evaluation sets errno and returns a NaN or an infinity
// instead of throwing, so that a claim the data cannot decide says so rather than aborting the
// report. Callers check their arguments first and read the value.

#include <boost/math/policies/policy.hpp>

namespace cart::stats {

using MathPolicy = boost::math::policies::policy<
    boost::math::policies::domain_error<boost::math::policies::errno_on_error>,
    boost::math::policies::pole_error<boost::math::policies::errno_on_error>,
    boost::math::policies::overflow_error<boost::math::policies::errno_on_error>,
    boost::math::policies::evaluation_error<boost::math::policies::errno_on_error>>;

}  // namespace cart::stats
