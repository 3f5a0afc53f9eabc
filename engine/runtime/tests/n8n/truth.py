#!/usr/bin/env python3
"""Runs a fixture in real n8n, its trigger's items given: the trigger node is
replaced by a Code node of the same name returning those items (fed by a
manual trigger), which is what pinning them does. Prints each leaf node's
item JSON per output."""
import json, subprocess, sys, uuid, os
fixture, trigger, items_json = sys.argv[1], sys.argv[2], sys.argv[3]
items = json.loads(items_json)
wf = json.load(open(fixture))
wf["id"] = uuid.uuid4().hex[:16]
wf["name"] = wf["name"] + " " + wf["id"]
if trigger != "-":
    for n in wf["nodes"]:
        if n["name"] == trigger:
            n["type"] = "n8n-nodes-base.code"; n["typeVersion"] = 2
            n["parameters"] = {"jsCode": "return " + json.dumps([{"json": i} for i in items]) + ";"}
            n.pop("webhookId", None)
    wf["nodes"].append({"parameters": {}, "type": "n8n-nodes-base.manualTrigger", "typeVersion": 1,
                        "position": [-300, 0], "id": str(uuid.uuid4()), "name": "Start"})
    wf["connections"]["Start"] = {"main": [[{"node": trigger, "type": "main", "index": 0}]]}
path = f"/root/n8n-truth/runs/{wf['id']}.json"
json.dump(wf, open(path, "w"))
env = dict(os.environ, N8N_LOG_LEVEL="info")
n8n = ["node", "/root/n8n-truth/node_modules/n8n/bin/n8n"]
subprocess.run(n8n + ["import:workflow", f"--input={path}"], env=env, check=True, capture_output=True)
out = subprocess.run(n8n + ["execute", "--id", wf["id"]], env=env, capture_output=True, text=True)
text = out.stdout
marker = "====================================\n"
if marker not in text:
    print("NO RESULT", text[-2000:], out.stderr[-2000:]); sys.exit(1)
res = json.JSONDecoder().raw_decode(text[text.index(marker) + len(marker):])[0]
rd = res["data"]["resultData"]
if rd.get("error"):
    print("ERROR", json.dumps(rd["error"])[:800])
run = rd["runData"]
sources = {src for src, c in wf["connections"].items() if any(outs for outs in c.get("main", []))}
for name, runs in run.items():
    if name in sources: continue
    data = runs[-1].get("data", {}).get("main", [[]])
    print(name, "=>", json.dumps([[i["json"] for i in port] for port in data if port is not None]))
