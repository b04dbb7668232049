BEGIN TRANSACTION;
CREATE TABLE work_approvals (
	id TEXT NOT NULL, 
	task_id TEXT NOT NULL, 
	run_id TEXT NOT NULL, 
	step INTEGER NOT NULL, 
	call INTEGER NOT NULL, 
	tool_id TEXT NOT NULL, 
	summary TEXT NOT NULL, 
	decision TEXT NOT NULL, 
	created_at TEXT NOT NULL, 
	answered_at TEXT, 
	PRIMARY KEY (id), 
	CONSTRAINT decision_known CHECK (decision IN ('pending', 'allowed-once', 'rejected')), 
	FOREIGN KEY(task_id) REFERENCES work_tasks (id), 
	FOREIGN KEY(run_id) REFERENCES work_runs (id)
);
INSERT INTO "work_approvals" VALUES('appr_01M8PXTGGEAB8JYPX9383FHFNY','task_01M8PXTGGB3Y1P7FRDQ4J7XN4W','run_01M8PXTGGBW0ZYKK7MAVZJBRD2',1,0,'files.write','write notes/r2.md (3 B)','pending','2026-11-30T19:10:04.814Z',NULL);
CREATE TABLE work_effects (
	id TEXT NOT NULL, 
	run_id TEXT NOT NULL, 
	step INTEGER NOT NULL, 
	call INTEGER NOT NULL, 
	attempt INTEGER NOT NULL, 
	tool_id TEXT NOT NULL, 
	arguments TEXT NOT NULL, 
	status TEXT NOT NULL, 
	result TEXT, 
	started_at TEXT NOT NULL, 
	completed_at TEXT, 
	PRIMARY KEY (id), 
	CONSTRAINT work_effects_key UNIQUE (run_id, step, call), 
	CONSTRAINT status_known CHECK (status IN ('started', 'completed', 'refused')), 
	FOREIGN KEY(run_id) REFERENCES work_runs (id)
);
INSERT INTO "work_effects" VALUES('eff_01M8PXTGG6Z74M369P9DY2CCKW','run_01M8PXTGFXDWZRD5B4N27JKAQD',1,0,1,'files.write','{"path":"notes/r1.md","content":"r1\n"}','completed','{"ok":true}','2026-11-30T19:10:04.806Z','2026-11-30T19:10:04.807Z');
CREATE TABLE work_events (
	task_id TEXT NOT NULL, 
	seq INTEGER NOT NULL, 
	run_id TEXT, 
	type TEXT NOT NULL, 
	data TEXT NOT NULL, 
	at TEXT NOT NULL, 
	PRIMARY KEY (task_id, seq), 
	FOREIGN KEY(task_id) REFERENCES work_tasks (id), 
	FOREIGN KEY(run_id) REFERENCES work_runs (id)
);
INSERT INTO "work_events" VALUES('task_01M8PXTGFX39XZENAZTK0W92M6',1,'run_01M8PXTGFXDWZRD5B4N27JKAQD','task.submitted','{"run_id":"run_01M8PXTGFXDWZRD5B4N27JKAQD"}','2026-11-30T19:10:04.800Z');
INSERT INTO "work_events" VALUES('task_01M8PXTGFX39XZENAZTK0W92M6',2,'run_01M8PXTGFXDWZRD5B4N27JKAQD','run.claimed','{"worker":"worker-r1","attempt":1}','2026-11-30T19:10:04.803Z');
INSERT INTO "work_events" VALUES('task_01M8PXTGFX39XZENAZTK0W92M6',3,'run_01M8PXTGFXDWZRD5B4N27JKAQD','run.finished','{"state":"COMPLETED","error":null}','2026-11-30T19:10:04.810Z');
INSERT INTO "work_events" VALUES('task_01M8PXTGGB3Y1P7FRDQ4J7XN4W',1,'run_01M8PXTGGBW0ZYKK7MAVZJBRD2','task.submitted','{"run_id":"run_01M8PXTGGBW0ZYKK7MAVZJBRD2"}','2026-11-30T19:10:04.812Z');
INSERT INTO "work_events" VALUES('task_01M8PXTGGB3Y1P7FRDQ4J7XN4W',2,'run_01M8PXTGGBW0ZYKK7MAVZJBRD2','run.claimed','{"worker":"worker-r1","attempt":1}','2026-11-30T19:10:04.813Z');
INSERT INTO "work_events" VALUES('task_01M8PXTGGB3Y1P7FRDQ4J7XN4W',3,'run_01M8PXTGGBW0ZYKK7MAVZJBRD2','approval.requested','{"approval_id":"appr_01M8PXTGGEAB8JYPX9383FHFNY","tool_id":"files.write","summary":"write notes/r2.md (3 B)"}','2026-11-30T19:10:04.815Z');
INSERT INTO "work_events" VALUES('task_01M8PXTGGGR4JX4HWH1BF5EPDR',1,'run_01M8PXTGGGZMM395YTBN6EP7D5','task.submitted','{"run_id":"run_01M8PXTGGGZMM395YTBN6EP7D5"}','2026-11-30T19:10:04.816Z');
CREATE TABLE work_messages (
	run_id TEXT NOT NULL, 
	position INTEGER NOT NULL, 
	role TEXT NOT NULL, 
	content TEXT NOT NULL, 
	at TEXT NOT NULL, 
	PRIMARY KEY (run_id, position), 
	CONSTRAINT role_known CHECK (role IN ('system', 'user', 'assistant', 'tool')), 
	FOREIGN KEY(run_id) REFERENCES work_runs (id)
);
INSERT INTO "work_messages" VALUES('run_01M8PXTGFXDWZRD5B4N27JKAQD',1,'user','a task finished by release 1','2026-11-30T19:10:04.798Z');
INSERT INTO "work_messages" VALUES('run_01M8PXTGFXDWZRD5B4N27JKAQD',2,'assistant','done','2026-11-30T19:10:04.809Z');
INSERT INTO "work_messages" VALUES('run_01M8PXTGGBW0ZYKK7MAVZJBRD2',1,'user','a task waiting for an approval in release 1','2026-11-30T19:10:04.811Z');
INSERT INTO "work_messages" VALUES('run_01M8PXTGGGZMM395YTBN6EP7D5',1,'user','a task still queued in release 1','2026-11-30T19:10:04.816Z');
CREATE TABLE work_replies (
	run_id TEXT NOT NULL, 
	step INTEGER NOT NULL, 
	request TEXT NOT NULL, 
	response TEXT NOT NULL, 
	at TEXT NOT NULL, 
	PRIMARY KEY (run_id, step), 
	FOREIGN KEY(run_id) REFERENCES work_runs (id)
);
INSERT INTO "work_replies" VALUES('run_01M8PXTGFXDWZRD5B4N27JKAQD',1,'{"messages":[{"role":"user","content":"a task finished by release 1"}]}','{"choices":[{"message":{"content":"{\"action\": \"final\", \"text\": \"done\"}"}}]}','2026-11-30T19:10:04.804Z');
CREATE TABLE work_runs (
	id TEXT NOT NULL, 
	task_id TEXT NOT NULL, 
	state TEXT NOT NULL, 
	attempt INTEGER NOT NULL, 
	worker TEXT, 
	lease_expires_at TEXT, 
	message_count INTEGER NOT NULL, 
	created_at TEXT NOT NULL, 
	updated_at TEXT NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT state_known CHECK (state IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL', 'COMPLETED', 'FAILED', 'CANCELLED')), 
	FOREIGN KEY(task_id) REFERENCES work_tasks (id)
);
INSERT INTO "work_runs" VALUES('run_01M8PXTGFXDWZRD5B4N27JKAQD','task_01M8PXTGFX39XZENAZTK0W92M6','COMPLETED',1,'worker-r1',NULL,2,'2026-11-30T19:10:04.798Z','2026-11-30T19:10:04.809Z');
INSERT INTO "work_runs" VALUES('run_01M8PXTGGBW0ZYKK7MAVZJBRD2','task_01M8PXTGGB3Y1P7FRDQ4J7XN4W','WAITING_APPROVAL',1,NULL,NULL,1,'2026-11-30T19:10:04.811Z','2026-11-30T19:10:04.814Z');
INSERT INTO "work_runs" VALUES('run_01M8PXTGGGZMM395YTBN6EP7D5','task_01M8PXTGGGR4JX4HWH1BF5EPDR','QUEUED',0,NULL,NULL,1,'2026-11-30T19:10:04.816Z','2026-11-30T19:10:04.816Z');
CREATE TABLE work_schema_version (
	version INTEGER NOT NULL, 
	summary TEXT NOT NULL, 
	applied_at TEXT NOT NULL, 
	PRIMARY KEY (version)
);
INSERT INTO "work_schema_version" VALUES(1,'create the work tables: tasks, runs, messages, events, approvals, provider replies, effects','2026-11-30T19:10:04.795Z');
CREATE TABLE work_tasks (
	id TEXT NOT NULL, 
	state TEXT NOT NULL, 
	message TEXT NOT NULL, 
	final_text TEXT, 
	event_seq INTEGER NOT NULL, 
	created_at TEXT NOT NULL, 
	updated_at TEXT NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT state_known CHECK (state IN ('QUEUED', 'RUNNING', 'WAITING_APPROVAL', 'COMPLETED', 'FAILED', 'CANCELLED'))
);
INSERT INTO "work_tasks" VALUES('task_01M8PXTGFX39XZENAZTK0W92M6','COMPLETED','a task finished by release 1','done',3,'2026-11-30T19:10:04.798Z','2026-11-30T19:10:04.809Z');
INSERT INTO "work_tasks" VALUES('task_01M8PXTGGB3Y1P7FRDQ4J7XN4W','WAITING_APPROVAL','a task waiting for an approval in release 1',NULL,3,'2026-11-30T19:10:04.811Z','2026-11-30T19:10:04.814Z');
INSERT INTO "work_tasks" VALUES('task_01M8PXTGGGR4JX4HWH1BF5EPDR','QUEUED','a task still queued in release 1',NULL,1,'2026-11-30T19:10:04.816Z','2026-11-30T19:10:04.816Z');
CREATE INDEX work_tasks_by_state ON work_tasks (state, created_at, id);
CREATE INDEX work_tasks_by_creation ON work_tasks (created_at, id);
CREATE INDEX work_runs_by_task ON work_runs (task_id, created_at);
CREATE INDEX work_runs_runnable ON work_runs (state, lease_expires_at, created_at);
CREATE INDEX work_approvals_by_task ON work_approvals (task_id, created_at);
CREATE INDEX work_approvals_by_run ON work_approvals (run_id, decision);
COMMIT;
