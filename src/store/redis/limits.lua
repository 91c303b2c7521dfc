-- SPDX-License-Identifier: MIT
-- Shared limits on Redis (skeleton; filled in next).
return {}
