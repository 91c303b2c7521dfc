/* SPDX-License-Identifier: MIT */
/*
 * Templates and payloads of scenario arrivals, read from the scenario file (internal to
 * scenario.c; scenario_expand(), scenario_payload() and scenario_key(), declared in scenario.h,
 * are implemented with them in payload.c).
 */
#ifndef SLUICE_CLI_PAYLOAD_H
#define SLUICE_CLI_PAYLOAD_H

#include <jansson.h>
#include <yaml.h>

#include "cli/sim/scenario.h"
#include "config/yaml_walk.h"

/* Checks the template t, the text of node: every placeholder is known, and {key} is used only
 * where key_allowed. Returns 0 or SLUICE_EINVAL with the message written at node. */
int payload_check_template(ywalk *w, const yaml_node_t *node, const char *t, int key_allowed);

/* Reads a payload: a YAML mapping (converted to a JSON object) or a JSON object written as a
 * string, with every string in it checked as a template. Sets *out to a new reference (the caller
 * decrefs it), or returns SLUICE_EINVAL / SLUICE_ENOMEM with the message written at node. */
int payload_read(ywalk *w, const yaml_node_t *node, json_t **out);

#endif
