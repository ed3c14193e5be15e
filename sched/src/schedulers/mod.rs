//! The scheduler implementations and [`create`], which builds one by name.
