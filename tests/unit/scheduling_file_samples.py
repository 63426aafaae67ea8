"""One scheduling file using every element, written in each format (shared by the tests)."""

from __future__ import annotations

FULL_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<job-scheduling-data xmlns="http://quartznet.sourceforge.net/JobSchedulingData" version="2.0">
  <pre-processing-commands>
    <delete-jobs-in-group>old-jobs</delete-jobs-in-group>
    <delete-triggers-in-group>old-triggers</delete-triggers-in-group>
    <delete-job>
      <name>gone</name>
      <group>legacy</group>
    </delete-job>
    <delete-trigger>
      <name>gone-trigger</name>
    </delete-trigger>
  </pre-processing-commands>
  <processing-directives>
    <overwrite-existing-data>true</overwrite-existing-data>
    <ignore-duplicates>false</ignore-duplicates>
  </processing-directives>
  <schedule>
    <job>
      <name>report</name>
      <group>nightly</group>
      <description>The nightly report</description>
      <job-type>tasks.report</job-type>
      <durable>true</durable>
      <recover>true</recover>
      <job-data-map>
        <entry><key>recipients</key><value>ops@example.com</value></entry>
        <entry><key>format</key><value>pdf</value></entry>
      </job-data-map>
      <disallow-concurrent-execution>true</disallow-concurrent-execution>
      <persist-job-data-after-execution>true</persist-job-data-after-execution>
      <args>[2026, "march"]</args>
      <kwargs>{"full": true}</kwargs>
      <options>{"queue": "batch"}</options>
    </job>
    <job>
      <name>ping</name>
      <job-type>tasks.ping</job-type>
    </job>
    <trigger>
      <simple>
        <name>every-ten-seconds</name>
        <group>pings</group>
        <description>Ping ten times</description>
        <job-name>ping</job-name>
        <job-group>DEFAULT</job-group>
        <priority>7</priority>
        <job-data-map>
          <entry><key>source</key><value>simple</value></entry>
        </job-data-map>
        <start-time>2026-03-02T10:00:00Z</start-time>
        <end-time>2026-03-03T10:00:00+02:00</end-time>
        <misfire-instruction>RescheduleNextWithRemainingCount</misfire-instruction>
        <repeat-count>10</repeat-count>
        <repeat-interval>10000</repeat-interval>
      </simple>
    </trigger>
    <trigger>
      <cron>
        <name>nightly</name>
        <job-name>report</job-name>
        <job-group>nightly</job-group>
        <retry-policy>
          <exponential>
            <max-attempts>5</max-attempts>
            <initial-delay>30000</initial-delay>
            <factor>2</factor>
            <max-delay>600000</max-delay>
          </exponential>
        </retry-policy>
        <preferred-node>celery@reports-1</preferred-node>
        <execution-group>reports</execution-group>
        <start-time-seconds-in-future>60</start-time-seconds-in-future>
        <misfire-instruction>DoNothing</misfire-instruction>
        <cron-expression>0 0 2 * * ?</cron-expression>
        <time-zone>Europe/Helsinki</time-zone>
      </cron>
    </trigger>
    <trigger>
      <calendar-interval>
        <name>monthly</name>
        <group>reports</group>
        <job-name>report</job-name>
        <job-group>nightly</job-group>
        <retry-policy>
          <fixed>
            <max-attempts>3</max-attempts>
            <delay>1000</delay>
          </fixed>
        </retry-policy>
        <preferred-node>*</preferred-node>
        <execution-group>reports</execution-group>
        <start-time>2026-03-31T09:00:00</start-time>
        <misfire-instruction>FireOnceNow</misfire-instruction>
        <repeat-interval>1</repeat-interval>
        <repeat-interval-unit>Month</repeat-interval-unit>
        <time-zone>America/New_York</time-zone>
        <preserve-hour-of-day-across-daylight-savings>true</preserve-hour-of-day-across-daylight-savings>
        <skip-day-if-hour-does-not-exist>true</skip-day-if-hour-does-not-exist>
      </calendar-interval>
    </trigger>
    <trigger>
      <cron>
        <name>hourly</name>
        <job-name>ping</job-name>
        <retry-policy>
          <explicit>
            <max-attempts>4</max-attempts>
            <delay>1000</delay>
            <delay>5000</delay>
          </explicit>
        </retry-policy>
        <cron-expression>0 0 * * * ?</cron-expression>
      </cron>
    </trigger>
  </schedule>
</job-scheduling-data>
"""

FULL_JSON = """\
{
  "PreProcessingCommands": {
    "DeleteJobsInGroup": ["old-jobs"],
    "DeleteTriggersInGroup": ["old-triggers"],
    "DeleteJob": [{"Name": "gone", "Group": "legacy"}],
    "DeleteTrigger": [{"Name": "gone-trigger"}]
  },
  "ProcessingDirectives": {"OverwriteExistingData": true, "IgnoreDuplicates": false},
  "Jobs": [
    {
      "Name": "report",
      "Group": "nightly",
      "Description": "The nightly report",
      "JobType": "tasks.report",
      "Durable": true,
      "Recover": true,
      "JobDataMap": {"recipients": "ops@example.com", "format": "pdf"},
      "DisallowConcurrentExecution": true,
      "PersistJobDataAfterExecution": true,
      "Args": [2026, "march"],
      "Kwargs": {"full": true},
      "Options": {"queue": "batch"}
    },
    {"Name": "ping", "JobType": "tasks.ping"}
  ],
  "Triggers": [
    {
      "Name": "every-ten-seconds",
      "Group": "pings",
      "Description": "Ping ten times",
      "JobName": "ping",
      "JobGroup": "DEFAULT",
      "Priority": 7,
      "JobDataMap": {"source": "simple"},
      "StartTime": "2026-03-02T10:00:00Z",
      "EndTime": "2026-03-03T10:00:00+02:00",
      "Simple": {
        "MisfireInstruction": "RescheduleNextWithRemainingCount",
        "RepeatCount": 10,
        "RepeatInterval": "00:00:10"
      }
    },
    {
      "Name": "nightly",
      "JobName": "report",
      "JobGroup": "nightly",
      "RetryPolicy": {
        "Exponential": {"MaxAttempts": 5, "InitialDelay": 30000, "Factor": 2, "MaxDelay": 600000}
      },
      "PreferredNode": "celery@reports-1",
      "ExecutionGroup": "reports",
      "StartTimeSecondsInFuture": 60,
      "Cron": {
        "MisfireInstruction": "DoNothing",
        "Expression": "0 0 2 * * ?",
        "TimeZone": "Europe/Helsinki"
      }
    },
    {
      "Name": "monthly",
      "Group": "reports",
      "JobName": "report",
      "JobGroup": "nightly",
      "RetryPolicy": {"Fixed": {"MaxAttempts": 3, "Delay": 1000}},
      "PreferredNode": "*",
      "ExecutionGroup": "reports",
      "StartTime": "2026-03-31T09:00:00",
      "CalendarInterval": {
        "MisfireInstruction": "FireOnceNow",
        "RepeatInterval": 1,
        "RepeatIntervalUnit": "Month",
        "TimeZone": "America/New_York",
        "PreserveHourOfDayAcrossDaylightSavings": true,
        "SkipDayIfHourDoesNotExist": true
      }
    },
    {
      "Name": "hourly",
      "JobName": "ping",
      "RetryPolicy": {"Explicit": {"MaxAttempts": 4, "Delays": [1000, 5000]}},
      "Cron": {"Expression": "0 0 * * * ?"}
    }
  ]
}
"""

FULL_YAML = """\
PreProcessingCommands:
  DeleteJobsInGroup: [old-jobs]
  DeleteTriggersInGroup: [old-triggers]
  DeleteJob:
    - {Name: gone, Group: legacy}
  DeleteTrigger:
    - Name: gone-trigger
ProcessingDirectives:
  OverwriteExistingData: true
  IgnoreDuplicates: false
Jobs:
  - Name: report
    Group: nightly
    Description: The nightly report
    JobType: tasks.report
    Durable: true
    Recover: true
    JobDataMap:
      recipients: ops@example.com
      format: pdf
    DisallowConcurrentExecution: true
    PersistJobDataAfterExecution: true
    Args: [2026, march]
    Kwargs: {full: true}
    Options: {queue: batch}
  - Name: ping
    JobType: tasks.ping
Triggers:
  - Name: every-ten-seconds
    Group: pings
    Description: Ping ten times
    JobName: ping
    JobGroup: DEFAULT
    Priority: 7
    JobDataMap: {source: simple}
    StartTime: 2026-03-02T10:00:00Z
    EndTime: "2026-03-03T10:00:00+02:00"
    Simple:
      MisfireInstruction: RescheduleNextWithRemainingCount
      RepeatCount: 10
      RepeatInterval: 10000
  - Name: nightly
    JobName: report
    JobGroup: nightly
    RetryPolicy:
      Exponential: {MaxAttempts: 5, InitialDelay: 30000, Factor: 2, MaxDelay: 600000}
    PreferredNode: celery@reports-1
    ExecutionGroup: reports
    StartTimeSecondsInFuture: 60
    Cron:
      MisfireInstruction: DoNothing
      Expression: 0 0 2 * * ?
      TimeZone: Europe/Helsinki
  - Name: monthly
    Group: reports
    JobName: report
    JobGroup: nightly
    RetryPolicy:
      Fixed: {MaxAttempts: 3, Delay: 1000}
    PreferredNode: "*"
    ExecutionGroup: reports
    StartTime: "2026-03-31T09:00:00"
    CalendarInterval:
      MisfireInstruction: FireOnceNow
      RepeatInterval: 1
      RepeatIntervalUnit: Month
      TimeZone: America/New_York
      PreserveHourOfDayAcrossDaylightSavings: true
      SkipDayIfHourDoesNotExist: true
  - Name: hourly
    JobName: ping
    RetryPolicy:
      Explicit: {MaxAttempts: 4, Delays: [1000, 5000]}
    Cron:
      Expression: 0 0 * * * ?
"""

FULL = {"xml": FULL_XML, "json": FULL_JSON, "yaml": FULL_YAML}

#: A file of Quartz.NET's schema alone (no celery-quartz element): what an XML export can hold.
QUARTZNET_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<job-scheduling-data xmlns="http://quartznet.sourceforge.net/JobSchedulingData" version="2.0">
  <processing-directives>
    <overwrite-existing-data>true</overwrite-existing-data>
  </processing-directives>
  <schedule>
    <job>
      <name>report</name>
      <group>nightly</group>
      <description>The nightly report</description>
      <job-type>tasks.report</job-type>
      <durable>true</durable>
      <recover>true</recover>
      <job-data-map>
        <entry><key>recipients</key><value>ops@example.com</value></entry>
        <entry><key>cc</key><value></value></entry>
      </job-data-map>
    </job>
    <job>
      <name>ping</name>
      <job-type>tasks.ping</job-type>
    </job>
    <trigger>
      <simple>
        <name>every-ten-seconds</name>
        <group>pings</group>
        <description>Ping ten times</description>
        <job-name>ping</job-name>
        <priority>7</priority>
        <job-data-map>
          <entry><key>source</key><value>simple</value></entry>
        </job-data-map>
        <start-time>2026-03-02T10:00:00Z</start-time>
        <end-time>2026-03-03T10:00:00+02:00</end-time>
        <misfire-instruction>RescheduleNextWithRemainingCount</misfire-instruction>
        <repeat-count>10</repeat-count>
        <repeat-interval>10000</repeat-interval>
      </simple>
    </trigger>
    <trigger>
      <cron>
        <name>nightly</name>
        <job-name>report</job-name>
        <job-group>nightly</job-group>
        <start-time-seconds-in-future>60</start-time-seconds-in-future>
        <misfire-instruction>DoNothing</misfire-instruction>
        <cron-expression>0 0 2 * * ?</cron-expression>
        <time-zone>Europe/Helsinki</time-zone>
      </cron>
    </trigger>
    <trigger>
      <calendar-interval>
        <name>monthly</name>
        <group>reports</group>
        <job-name>report</job-name>
        <job-group>nightly</job-group>
        <start-time>2026-03-31T09:00:00Z</start-time>
        <misfire-instruction>FireOnceNow</misfire-instruction>
        <repeat-interval>1</repeat-interval>
        <repeat-interval-unit>Month</repeat-interval-unit>
      </calendar-interval>
    </trigger>
  </schedule>
</job-scheduling-data>
"""
