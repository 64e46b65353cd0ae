//! The labelled set that measures `search_tools` (V4): a catalogue modelled on
//! real servers (filesystem, memory, notes, web, git hosting, calendar, mail,
//! chat, time, weather), and queries phrased as tasks, not tool names, each
//! with the tool that does it. Read by the quality test (`quality.rs`) and by
//! the search bench (`benches/search.rs`), which includes this file.

use serde_json::{json, Value};

fn tool(name: &str, description: &str, params: &[(&str, &str)]) -> Value {
    let props: serde_json::Map<String, Value> = params
        .iter()
        .map(|(p, d)| ((*p).to_owned(), json!({"type": "string", "description": d})))
        .collect();
    json!({"name": name, "description": description,
        "inputSchema": {"type": "object", "properties": props}})
}

pub fn catalogue() -> Vec<Value> {
    vec![
        tool("fs.read_file", "Read the complete contents of a file from the file system.", &[("path", "Path of the file")]),
        tool("fs.write_file", "Create a new file or completely overwrite an existing file with new content.", &[("path", "Path of the file"), ("content", "Text to write")]),
        tool("fs.edit_file", "Make line-based edits to a text file, replacing exact text.", &[("path", "Path of the file"), ("edits", "Old and new text")]),
        tool("fs.create_directory", "Create a new directory, or make sure it exists.", &[("path", "Directory path")]),
        tool("fs.list_directory", "Get a detailed listing of all files and directories in a folder.", &[("path", "Directory path")]),
        tool("fs.move_file", "Move or rename files and directories.", &[("source", "Current path"), ("destination", "New path")]),
        tool("fs.search_files", "Recursively search for files and directories whose names match a pattern.", &[("path", "Where to start"), ("pattern", "Glob pattern")]),
        tool("fs.get_file_info", "Retrieve metadata about a file: size, creation time, last modified time, permissions.", &[("path", "Path of the file")]),
        tool("memory.create_entities", "Create multiple new entities in the knowledge graph.", &[("entities", "Entities with name, type and observations")]),
        tool("memory.create_relations", "Create relations between entities in the knowledge graph, in active voice.", &[("relations", "From, to and relation type")]),
        tool("memory.add_observations", "Add new observations (facts) to existing entities in the knowledge graph.", &[("observations", "Entity name and facts")]),
        tool("memory.delete_entities", "Delete entities and their relations from the knowledge graph.", &[("entityNames", "Names to delete")]),
        tool("memory.search_nodes", "Search for nodes in the knowledge graph by a query over names, types and observations.", &[("query", "What to look for")]),
        tool("memory.read_graph", "Read the entire knowledge graph.", &[]),
        tool("notes.search_notes", "Search your notes by text and return matching notes.", &[("query", "Words to find")]),
        tool("notes.create_note", "Create a note with a title and a body.", &[("title", "Note title"), ("body", "Note text")]),
        tool("notes.list_notes", "List all your notes, newest first.", &[]),
        tool("notes.publish_note", "Publish a note so that anyone with the link can read it.", &[("id", "Note id")]),
        tool("notes.delete_note", "Delete a note for good.", &[("id", "Note id")]),
        tool("web.fetch", "Fetch a URL from the internet and return the page as markdown.", &[("url", "The web address")]),
        tool("web.search", "Search the web and return result titles, links and snippets.", &[("query", "Search terms")]),
        tool("git.create_issue", "Open a new issue in a repository.", &[("repo", "owner/name"), ("title", "Issue title"), ("body", "Issue text")]),
        tool("git.list_issues", "List the open issues of a repository, filtered by label or state.", &[("repo", "owner/name"), ("labels", "Labels")]),
        tool("git.create_pull_request", "Open a pull request to merge a branch into another.", &[("repo", "owner/name"), ("head", "Branch with changes"), ("base", "Target branch")]),
        tool("git.get_file_contents", "Get the contents of a file or directory in a repository at a ref.", &[("repo", "owner/name"), ("path", "File path")]),
        tool("git.search_code", "Search source code across repositories.", &[("q", "Code search query")]),
        tool("git.list_commits", "List the commits of a branch.", &[("repo", "owner/name"), ("sha", "Branch or commit")]),
        tool("calendar.list_events", "List calendar events between two dates.", &[("start", "From date"), ("end", "To date")]),
        tool("calendar.create_event", "Schedule a calendar event and invite attendees.", &[("title", "Event title"), ("start", "Start time"), ("attendees", "Who to invite")]),
        tool("mail.send_email", "Send an email message to one or more recipients.", &[("to", "Recipients"), ("subject", "Subject line"), ("body", "Message text")]),
        tool("mail.search_email", "Search the mailbox for messages by sender, subject or words.", &[("query", "What to find")]),
        tool("chat.post_message", "Post a message to a chat channel.", &[("channel", "Channel name"), ("text", "Message")]),
        tool("chat.list_channels", "List the chat channels of the workspace.", &[]),
        tool("time.get_current_time", "Get the current time in a time zone.", &[("timezone", "IANA time zone name")]),
        tool("time.convert_time", "Convert a time between time zones.", &[("time", "Time to convert"), ("source_timezone", "From zone"), ("target_timezone", "To zone")]),
        tool("weather.get_forecast", "Get the weather forecast for a location.", &[("latitude", "Latitude"), ("longitude", "Longitude")]),
        tool("weather.get_alerts", "Get active weather alerts for a US state.", &[("state", "Two-letter state code")]),
    ]
}

/// (query phrased as a task, the tool that does it).
pub const LABELLED: &[(&str, &str)] = &[
    ("find the notes about the launch", "notes.search_notes"),
    ("write down a note titled ideas", "notes.create_note"),
    ("show me all my notes", "notes.list_notes"),
    (
        "make my note public so others can read it",
        "notes.publish_note",
    ),
    ("remove that note permanently", "notes.delete_note"),
    (
        "open the config file and show what is in it",
        "fs.read_file",
    ),
    ("save this text to a new file", "fs.write_file"),
    ("replace a line in the text file", "fs.edit_file"),
    ("make a folder called build", "fs.create_directory"),
    ("what files are in this folder", "fs.list_directory"),
    ("rename report.txt to final.txt", "fs.move_file"),
    ("find files whose names match *.log", "fs.search_files"),
    (
        "how big is this file and when was it last modified",
        "fs.get_file_info",
    ),
    (
        "remember that Alice is a person who works at Acme",
        "memory.create_entities",
    ),
    (
        "record that Alice works for Acme as a relation",
        "memory.create_relations",
    ),
    (
        "add a fact to what we know about Alice",
        "memory.add_observations",
    ),
    ("forget the entity Bob entirely", "memory.delete_entities"),
    (
        "look up what the knowledge graph knows about Acme",
        "memory.search_nodes",
    ),
    ("dump the whole knowledge graph", "memory.read_graph"),
    ("download this web page as markdown", "web.fetch"),
    ("get the contents of https://example.com", "web.fetch"),
    ("search the internet for rust async tutorials", "web.search"),
    ("file a bug in the repository", "git.create_issue"),
    (
        "which issues are open with the bug label",
        "git.list_issues",
    ),
    (
        "open a pull request to merge my branch into main",
        "git.create_pull_request",
    ),
    (
        "read README.md from the repository",
        "git.get_file_contents",
    ),
    (
        "where in the code is this function defined across repositories",
        "git.search_code",
    ),
    (
        "show the recent commits on the main branch",
        "git.list_commits",
    ),
    ("what meetings do I have next week", "calendar.list_events"),
    (
        "schedule a meeting with Bob on Friday",
        "calendar.create_event",
    ),
    (
        "invite the team to a calendar event",
        "calendar.create_event",
    ),
    ("email the report to my manager", "mail.send_email"),
    (
        "send a message by email to alice@example.com",
        "mail.send_email",
    ),
    (
        "find the email from the landlord about rent",
        "mail.search_email",
    ),
    ("search my mailbox for invoices", "mail.search_email"),
    ("post an update in the team channel", "chat.post_message"),
    (
        "tell the chat channel the deploy is done",
        "chat.post_message",
    ),
    ("which chat channels exist", "chat.list_channels"),
    ("what time is it in Tokyo", "time.get_current_time"),
    (
        "current time in the Europe/Paris time zone",
        "time.get_current_time",
    ),
    (
        "convert 3pm New York time to London time",
        "time.convert_time",
    ),
    (
        "will it rain tomorrow at this location",
        "weather.get_forecast",
    ),
    ("weather forecast for Berlin", "weather.get_forecast"),
    ("are there storm alerts in Texas", "weather.get_alerts"),
    (
        "any active weather warnings for the state of CA",
        "weather.get_alerts",
    ),
    (
        "overwrite the existing file with new content",
        "fs.write_file",
    ),
    ("list the directory contents", "fs.list_directory"),
    ("move the file to the archive folder", "fs.move_file"),
    ("search notes for the budget", "notes.search_notes"),
    ("create a new issue about the crash", "git.create_issue"),
    ("read the entire graph of entities", "memory.read_graph"),
    ("fetch the URL and summarise it", "web.fetch"),
    ("look at the file permissions", "fs.get_file_info"),
    ("post a chat message saying hello", "chat.post_message"),
];
