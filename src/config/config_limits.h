/* SPDX-License-Identifier: MIT */
/*
 * The `limits:` section of the configuration file (see docs/configuration.md for its format).
 */
#ifndef SLUICE_CONFIG_LIMITS_H
#define SLUICE_CONFIG_LIMITS_H

#include "config/yaml_walk.h"
#include "sluice/config.h"

/* Reads the limits section (a mapping of name to settings, or null for none) into cfg->limits
 * and cfg->nlimits, each limit checked with the policy rules. On failure returns the error
 * reported through w (SLUICE_EINVAL or SLUICE_ENOMEM); what was read so far stays in cfg for
 * sluice_config_clear(). The walker's path must be "limits". */
int config_parse_limits(ywalk *w, const yaml_node_t *section, sluice_config *cfg);

#endif
